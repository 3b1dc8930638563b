"""Ledger drivers: SQLite (default) and JSONL."""
