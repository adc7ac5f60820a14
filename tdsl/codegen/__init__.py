"""Code generators: LLVM (CPU) and the C-family source printers."""
