"""Model judges of completions, `config.generative_verifier.kind`: the generative verifier ("p_yes", `generative`: a
decoder prompted to answer Yes / No, its reward the probability of Yes) and the critique judge ("critique",
`critique`: a decoder that writes a critique ending in a score, k samples summed: DeepSeek-GRM)."""
