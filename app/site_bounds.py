"""What an answer of a federated stream keeps when one of its sites is missing (contract §11).

A site that cannot be read, that is older than ``TIDEMARK_SITE_MAX_AGE``, or whose
summary cannot be merged (another hash secret, other settings) leaves its events out of
the merge. The answer is then of the sites that answered, and it says so: ``incomplete``
names the missing sites (``["eu"]``), ``incomplete_sites`` says why for each, every
``confidence`` drops to 0, and only the sides of each bound that still hold for the union
of all sites' events stay; the others are null.

Which side still holds depends on the kind (``SIDES``, from the kinds that declare
themselves ``monotone`` in their family's module, ``app/kinds/``):

* **Monotone kinds** — ``count``, ``sum``, ``frequency``, ``distinct``, ``self-join``,
  ``inner-product``, ``decayed-sum``, ``decayed-range-sum``, and each listed key of
  ``heavy-hitters`` — can only grow when events are added (weights are ≥ 0, a decay is
  ≥ 0, a key's count and a distinct count never shrink, Σ f² and Σ f_A·f_B grow with every
  f). The true value over all sites is therefore at least the true value over the sites
  that answered, which is at least their merged ``lower``: **the lower bound stays, the
  upper becomes null** (the missing site may hold any number of events).
* **Ratios and ranks** — ``quantiles``, ``distribution`` (its rows keep ``cdf_lower``, a
  count, and lose ``cdf_upper`` and both shares), ``decayed-quantile``,
  ``decayed-frequency``, ``decayed-heavy-hitters`` — can move either way when events are
  added: **both sides become null**; the estimate is the answering sites' and says nothing
  of the union.
* A kind that does not declare itself monotone is treated as a ratio (both sides null): a
  new kind must say it is monotone (``QueryKind.monotone``) to keep a side.

Heavy hitters also lose ``complete`` (a key heavy at the missing site may be unlisted),
``unlisted_max`` and the upper side of ``events``. The estimate stays the answering
sites' own, so a reader sees what was counted; never a silent partial answer.

Alerts read a null upper as +∞ and a null lower as −∞ (``app/alerts/engine.py``): a
``certain`` rule still fires on a lower bound that holds, a ``possible`` one fires on
what is no longer bounded.

Tested by: tests/app/test_federation_merge.py (mark_sites).
"""

from __future__ import annotations

from app.kinds import QUERY_KINDS
from app.kinds.kind import own_items

__all__ = ["SIDES", "mark_sites"]

SIDES: dict[str, tuple[str, ...]] = {name: ("lower",) for name, kind in QUERY_KINDS.items() if kind.monotone}
_WIDTHS = ("half_width", "half_width_relative")


def _drop(bound: dict, keep: tuple[str, ...]) -> None:
    for side in ("lower", "upper"):
        if side in bound and side not in keep:
            bound[side] = None
    for field in _WIDTHS:
        if field in bound:
            bound[field] = None
    bound["confidence"] = 0.0


def mark_sites(body: dict, kind: str, missing: dict[str, str]) -> dict:
    """``body`` (the contract's answer object) as of the sites that answered, when
    ``missing`` (site -> why) is not empty (module notes)."""
    if not missing:
        return body
    keep = SIDES.get(kind, ())
    names = sorted(missing)
    lost = body.get("incomplete")
    # The contract's form, the sites' names; an answer that also misses accepted events of
    # a site that answered (``answers.mark_incomplete``) keeps that record and names the sites in it.
    body["incomplete"] = {**lost, "sites": names} if isinstance(lost, dict) else names
    body["incomplete_sites"] = {site: missing[site] for site in names}
    items = own_items(body)
    for b in [body.get("bound")] + [item.get("bound") for item in items if isinstance(item, dict)]:
        if isinstance(b, dict):
            _drop(b, keep)
    for item in items:  # distribution: its brackets ride on the items
        if isinstance(item, dict):
            for field in ("cdf_upper", "share_lower", "share_upper"):
                if field in item:
                    item[field] = None  # cdf_lower, a count of events at or below, stays
    if "complete" in body:
        body["complete"] = False
    if "unlisted_max" in body:
        body["unlisted_max"] = None
    if isinstance(body.get("events"), dict) and "upper" in body["events"]:
        body["events"]["upper"] = None
    return body
