"""agentpost.actkv"""
