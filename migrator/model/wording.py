"""How the tool writes a number of things: "1 pod", "3 pods", "0 pods"."""


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (`many`: an irregular plural)."""
    return f"{n} {one if n == 1 else many or one + 's'}"
