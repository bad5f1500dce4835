"""Writes train.csv and val.csv: the synthetic regression task of the csvfit
example (README), y1 = 2 x1 - x2 + 0.5 x3 + 1 + e1, y2 = -x1 + 3 x3 + e2,
x ~ U(-1, 1), e ~ N(0, 0.1^2). Deterministic: `python3 make_csv.py`."""
import random


def write(path, rows, seed):
    rng = random.Random(seed)
    with open(path, "w") as out:
        out.write("x1,x2,x3,y1,y2\n")
        for _ in range(rows):
            x1, x2, x3 = (rng.uniform(-1, 1) for _ in range(3))
            y1 = 2 * x1 - x2 + 0.5 * x3 + 1 + rng.gauss(0, 0.1)
            y2 = -x1 + 3 * x3 + rng.gauss(0, 0.1)
            out.write(f"{x1:.6f},{x2:.6f},{x3:.6f},{y1:.6f},{y2:.6f}\n")


write("train.csv", 512, 1)
write("val.csv", 128, 2)
