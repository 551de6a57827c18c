"""Thin routers: parse the request, call the layer below, shape the response."""
