"""agentpost: tested implementations and executable evidence for LLM-agent efficiency and post-training papers."""

__version__ = "0.1.0"
