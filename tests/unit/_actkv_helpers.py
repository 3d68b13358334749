"""Shared by the ActKV generation tests."""


class CountingTok:
    """Decodes by call order (the tiny random model repeats one token): every 6th text opens a tool call, two
    texts later it closes; ``log`` keeps (id, text) of every decode."""

    eos_token_id = -1

    def __init__(self):
        self.log = []

    def decode(self, ids, skip_special_tokens=False):
        i = len(self.log)
        text = "<tool_call>" if i % 6 == 2 else ("</tool_call>" if i % 6 == 4 else "x")
        self.log.append((ids[0], text))
        return text
