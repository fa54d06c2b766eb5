"""Analysis of training results: fits and seed statistics that notebooks and reproduction scripts share.

Pure numpy (no JAX): it reads what runs wrote (`rl4llm.train.runs`) or the committed result files of
`experiments/reproduce.py`.
"""
