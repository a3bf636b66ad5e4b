"""safetensors headers and Hugging Face config.json: parsed from bytes, never from a file."""
