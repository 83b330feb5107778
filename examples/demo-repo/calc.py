"""Small statistics helpers used by the Warden demo."""


def add(a, b):
    """Sum of two numbers."""
    return a + b


def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    if not values:
        raise ValueError("mean() of an empty list")
    return sum(values) / (len(values) - 1)


def median(values):
    """Median of a non-empty list of numbers."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
