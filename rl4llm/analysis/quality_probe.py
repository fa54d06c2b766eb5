"""Whether a rollout's success can be read off the policy's hidden state after its first k tokens: the question
ARRoL's quality head (`rl4llm.rl.pruning`) depends on, asked offline with a logistic-regression probe.

`fit_logistic` is L2-regularised logistic regression by full-batch gradient descent on standardised features;
`within_group_auc` is the probability that, in one prompt's group, a successful rollout gets a higher prediction
than a failed one (ties count ½): what pruning a group needs, whatever the groups' base rates. 0.5 = no signal.
"""

from __future__ import annotations

import numpy as np


def fit_logistic(features: np.ndarray, labels: np.ndarray, *, steps: int = 2000, learning_rate: float = 0.1,
                 l2: float = 1e-3):
    """(predict, w, b): p(x) = σ(w·z(x) + b), z the standardisation by the training features' mean and std, fitted by
    `steps` gradient-descent steps on the mean log loss + l2/2·|w|². features [N, E], labels [N] in {0, 1}."""
    x = np.asarray(features, np.float64)
    y = np.asarray(labels, np.float64)
    mean, std = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / std
    w, b = np.zeros(x.shape[1]), 0.0
    for _ in range(steps):
        g = 1.0 / (1.0 + np.exp(-(z @ w + b))) - y
        w -= learning_rate * (z.T @ g / len(y) + l2 * w)
        b -= learning_rate * g.mean()

    def predict(new_features):
        return 1.0 / (1.0 + np.exp(-(((np.asarray(new_features, np.float64) - mean) / std) @ w + b)))

    return predict, w, b


def within_group_auc(scores: np.ndarray, labels: np.ndarray, group_ids: np.ndarray) -> float:
    """P(score of a success > score of a failure) over the (success, failure) pairs of each group, ties ½; NaN when
    no group has both."""
    wins = pairs = 0.0
    for g in np.unique(group_ids):
        s, y = scores[group_ids == g], labels[group_ids == g] > 0.5
        pos, neg = s[y][:, None], s[~y][None, :]
        wins += float((pos > neg).sum() + 0.5 * (pos == neg).sum())
        pairs += pos.size * neg.size
    return wins / pairs if pairs else float("nan")


def group_centred(features: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Each row's features minus its group's mean [N, E]: only what differs between one prompt's rollouts."""
    features = np.asarray(features, np.float64)
    sums = np.zeros((int(group_ids.max()) + 1, features.shape[1]))
    np.add.at(sums, group_ids, features)
    return features - (sums / np.bincount(group_ids)[:, None])[group_ids]
