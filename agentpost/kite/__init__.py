"""agentpost.kite"""
