"""Intrinsic metrics: each returns scores plus a signature saying exactly how they were computed."""
