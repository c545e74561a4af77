"""Deterministic imaging workloads shared by the scripts and servers of this
directory (after FunctionBench's image_processing and video_processing).

Everything here depends only on its arguments: the same call with the same
Pillow, NumPy and OpenCV gives the same bytes, in torpor or natively.
"""

import hashlib
import random

import numpy as np
from PIL import Image, ImageDraw


def make_image(width, height, noise=0.0, seed=5):
    """An RGB picture of `width` x `height`: gradients, a Mandelbrot set and
    ellipses, blended with `noise` (0 to 1) of seeded random noise (noise
    makes the JPEG encoding larger)."""
    red = Image.linear_gradient("L").resize((width, height), Image.BILINEAR)
    green = Image.radial_gradient("L").resize((width, height), Image.BILINEAR)
    blue = Image.effect_mandelbrot((width, height), (-2.0, -1.25, 0.75, 1.25), 64)
    img = Image.merge("RGB", (red, green, blue))
    rng = random.Random(seed)
    draw = ImageDraw.Draw(img)
    for _ in range(48):
        x, y = rng.randrange(width), rng.randrange(height)
        rx, ry = rng.randrange(4, width // 4 + 5), rng.randrange(4, height // 4 + 5)
        color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        draw.ellipse((x - rx, y - ry, x + rx, y + ry), outline=color, width=rng.randrange(1, 9))
    if noise > 0:
        grain = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
        img = Image.blend(img, grain, noise)
    return img


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def make_video(path, frames, width, height, fps=30.0):
    """Writes a colour MJPG .avi of `frames` frames: a moving gradient with
    moving circles and the frame number."""
    import cv2

    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"cannot open a VideoWriter for {path}")
    gx = (np.arange(width, dtype=np.uint32) * 255 // max(width - 1, 1)).astype(np.uint8)
    gy = (np.arange(height, dtype=np.uint32) * 255 // max(height - 1, 1)).astype(np.uint8)
    base = np.empty((height, width, 3), np.uint8)
    base[..., 0] = gx[None, :]
    base[..., 1] = gy[:, None]
    base[..., 2] = gx[None, :] // 2 + gy[:, None] // 2
    for i in range(frames):
        # uint8 arithmetic: the gradients shift and wrap around.
        frame = base + np.array([4 * i % 256, 3 * i % 256, 7 * i % 256], np.uint8)
        for k in range(6):
            cx = (37 * k + 5 * i) % width
            cy = (53 * k + 3 * i) % height
            cv2.circle(frame, (cx, cy), 10 + 4 * k, (40 * k, 255 - 40 * k, 128), -1)
        cv2.putText(frame, f"frame {i}", (8, height - 12), cv2.FONT_HERSHEY_SIMPLEX,
                    0.8, (255, 255, 255), 2)
        writer.write(frame)
    writer.release()


def gray_video(src, dst):
    """FunctionBench's video_processing: reads `src` frame by frame, converts
    each to grayscale and writes it to `dst` (MJPG). Returns the number of
    frames and the SHA-256 of the grayscale frames as decoded."""
    import cv2

    cap = cv2.VideoCapture(src)
    if not cap.isOpened():
        raise RuntimeError(f"cannot open {src}")
    width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
    height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    fps = cap.get(cv2.CAP_PROP_FPS)
    writer = cv2.VideoWriter(dst, cv2.VideoWriter_fourcc(*"MJPG"), fps, (width, height),
                             isColor=False)
    if not writer.isOpened():
        raise RuntimeError(f"cannot open a VideoWriter for {dst}")
    h = hashlib.sha256()
    frames = 0
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        gray = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        h.update(gray.tobytes())
        writer.write(gray)
        frames += 1
    cap.release()
    writer.release()
    return frames, h.hexdigest()
