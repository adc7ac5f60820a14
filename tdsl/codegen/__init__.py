"""Code generators: LLVM for the CPU (`llvm`: IR, target machines, compiling to object
files) and the C-family source printers (`source`: C, CUDA, OpenCL)."""
