"""Resizes a deterministic picture with Pillow and writes the results.

    python3 resize.py OUT_DIR

Writes OUT_DIR/input.png (the 1024x768 picture), OUT_DIR/small.png (LANCZOS
down to 300x225) and OUT_DIR/large.jpg (BICUBIC up to 1600x1200, JPEG
quality 90), and prints one line per file: its name, size and SHA-256.
crates/torpor/tests/imaging.rs runs it in torpor and natively and compares the
files byte for byte.
"""

import os
import sys

from PIL import Image

from workloads import make_image, sha256


def main():
    out = sys.argv[1]
    img = make_image(1024, 768, noise=0.15)
    files = {
        "input.png": (img, "PNG", {}),
        "small.png": (img.resize((300, 225), Image.LANCZOS), "PNG", {}),
        "large.jpg": (img.resize((1600, 1200), Image.BICUBIC), "JPEG", {"quality": 90}),
    }
    for name, (im, fmt, opts) in files.items():
        path = os.path.join(out, name)
        im.save(path, fmt, **opts)
        with open(path, "rb") as f:
            data = f.read()
        print(f"{name} {im.size[0]}x{im.size[1]} {len(data)} {sha256(data)}")


if __name__ == "__main__":
    main()
