"""`kvbench validate` and `kvbench matrix`: recipes in, job rows out."""

from __future__ import annotations
