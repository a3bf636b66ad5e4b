"""GGUF headers (llama.cpp, ggml docs/gguf.md): parsed from bytes, never from a file."""
