"""Bound-aware threshold alerts delivered as signed webhooks (contract §7)."""
