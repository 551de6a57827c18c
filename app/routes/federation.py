"""A stream's published summary for peer sites (contract §11): the bytes, and only what
changed.

* ``GET /v1/streams/{name}/summary``: this deployment's published summary of the stream
  (the binary form the workers publish, ``tidemark/summary.py``), its version in ``ETag``
  (a digest of the bytes: the bytes of a version never change), ``If-None-Match`` → ``304``,
  the version's status (``sketch_version``, ``updated_at``, ``events``, …) as JSON in the
  ``Tidemark-Status`` header.
* ``GET /v1/streams/{name}/summary/manifest``: the same version as a list of
  content-addressed segments ``[[part, digest, length], …]`` (the summary cut at its part
  boundaries, ``tidemark/segments.py``) with the stream's settings, the hash secret's
  fingerprint and the status; ``ETag``/``If-None-Match`` as above.
* ``GET /v1/streams/{name}/summary/segments?digests=d1,d2``: those segments' bytes,
  concatenated in the order asked (``410`` when one is no longer held: ask the manifest
  again).
* ``GET /v1/streams/{name}/summary/delta?since=<etag>``: the newest version as a Zstandard
  delta from the version ``since`` (the old bytes are the dictionary), ``304`` when it is
  the newest, ``410`` when it is no longer kept.

A peer holding a version asks for the delta since it (unchanged: a ``304``; changed: the
bytes that changed, compressed against the old ones). A peer holding nothing, or a version
no longer kept, asks the manifest and fetches only the segments whose digests it does not
hold: a part no event touched keeps its digest and is never sent again (``docs/design.md``,
Federation). A federated
stream serves its own (``local``) summary here, never the merge of its sites.

Tested by: tests/app/test_federation.py
(test_the_summary_endpoint_serves_versions_and_only_what_changed, and the sites' pulls).
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from app.deps import READ, DeclarationsDep, FederationDep
from app.site_serving import MAX_DIGESTS, STATUS_HEADER
from app.routes.streams import StreamName

__all__ = ["router"]

router = APIRouter(prefix="/v1/streams", tags=["federation"], dependencies=[READ])
_DIGEST = re.compile(r"^[0-9a-f]{32}$")


def _unchanged(request: Request, etag: str) -> bool:
    sent = request.headers.get("if-none-match", "")
    return any(t.strip() in (etag, "*") for t in sent.split(",")) if sent else False


@router.get("/{name}/summary", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}, 304: {}})
def summary(name: StreamName, request: Request, declarations: DeclarationsDep, federation: FederationDep) -> Response:
    """The stream's published summary bytes (empty before its first publish)."""
    declarations.config(name)  # 404 for a stream not declared here
    p = federation.serving.published(name)
    headers = {"ETag": p.etag, STATUS_HEADER: json.dumps(p.status), "Cache-Control": "no-cache"}
    if _unchanged(request, p.etag):
        return Response(status_code=304, headers=headers)
    return Response(p.blob, media_type="application/octet-stream", headers=headers)


@router.get("/{name}/summary/delta", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}, 304: {}, 410: {}})
def delta(name: StreamName, request: Request, declarations: DeclarationsDep, federation: FederationDep,
          since: Annotated[str | None, Query(max_length=80, description="the ETag of the version held")] = None,
          ) -> Response:
    """The newest version as a delta from ``since``: Zstandard with the bytes of ``since`` as
    the dictionary (decompress with them to get the version named in ``ETag``). ``304``
    when ``since`` is the newest; ``410`` when it is no longer kept (ask the manifest)."""
    declarations.config(name)  # an absent stream is a 404 before a missing parameter is a 422
    if not since:
        raise HTTPException(422, "since: the ETag of the version held is required")
    p, made = federation.serving.delta(name, since)
    headers = {"ETag": p.etag, STATUS_HEADER: json.dumps(p.status), "Cache-Control": "no-cache"}
    if _unchanged(request, p.etag) or since == p.etag:
        return Response(status_code=304, headers=headers)
    if made is None:
        raise HTTPException(410, "that version is no longer kept here: ask the manifest")
    # already compressed: the API's gzip would only cost CPU (identity keeps it off)
    return Response(made, media_type="application/octet-stream", headers={**headers, "Content-Encoding": "identity"})


@router.get("/{name}/summary/manifest")
def manifest(name: StreamName, request: Request, declarations: DeclarationsDep, federation: FederationDep) -> Response:
    """The published version as content-addressed segments, with what a peer checks before
    merging it: the settings and the hash secret's fingerprint."""
    config = declarations.config(name)
    p = federation.serving.published(name)
    headers = {"ETag": p.etag, "Cache-Control": "no-cache"}
    if _unchanged(request, p.etag):
        return Response(status_code=304, headers=headers)
    return JSONResponse({"stream": name, "etag": p.etag, "settings": config.public(),
                         "fingerprint": federation.secret.fingerprint,
                         "segments": p.manifest, "status": p.status}, headers=headers)


@router.get("/{name}/summary/segments", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}, 410: {}})
def segments(name: StreamName, declarations: DeclarationsDep, federation: FederationDep,
             digests: Annotated[str | None, Query(max_length=MAX_DIGESTS * 33,
                                                  description="comma-separated segment digests")] = None,
             ) -> Response:
    """The segments named, concatenated in the order asked (their lengths are the
    manifest's)."""
    declarations.config(name)  # an absent stream is a 404 before a missing parameter is a 422
    asked = [d.strip() for d in (digests or "").split(",") if d.strip()]
    if not asked or len(asked) > MAX_DIGESTS or not all(_DIGEST.match(d) for d in asked):
        raise HTTPException(422, f"digests: 1 to {MAX_DIGESTS} segment digests (32 hex digits), "
                                 "comma-separated")
    found = federation.serving.segments_of(name, asked)
    if found is None:
        raise HTTPException(410, "a segment asked is no longer held (a newer version replaced it): "
                                 "ask the manifest again")
    return Response(b"".join(found), media_type="application/octet-stream",
                    headers={"Cache-Control": "private, max-age=31536000, immutable"})
