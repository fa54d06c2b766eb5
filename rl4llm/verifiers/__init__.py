"""Model judges of completions: the generative verifier (`generative`: a decoder prompted to answer Yes / No, its
reward the probability of Yes)."""
