"""Small models and tokenizers the project trains itself, loaded through Hugging Face ``from_pretrained``."""
