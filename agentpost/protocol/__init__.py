"""The protocol chapter's teaching example: two n-gram language models on WikiText-2."""
