"""agentpost.run"""
