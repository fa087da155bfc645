"""The models: the shape (`ModelSpec`), the table of known models and the Hugging Face config readers."""
