"""Hidden checks of the assignment self_attention: test_<part id>.py per part, and their shared inputs."""
