"""agentpost.rl"""
