"""Loop-IR passes: each a function from PrimFunc to PrimFunc."""
