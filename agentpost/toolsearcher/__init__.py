"""agentpost.toolsearcher"""
