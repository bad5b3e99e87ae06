"""The AOT executor: memory plan, linked params and entry point."""
