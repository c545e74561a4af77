"""FunctionBench's video processing with OpenCV: a colour video to grayscale.

    python3 video.py make OUT.avi [FRAMES [WIDTH HEIGHT]]
    python3 video.py gray IN.avi OUT.avi

`make` writes a deterministic MJPG video (default 60 frames of 320x240);
`gray` reads IN.avi with cv2.VideoCapture, converts every frame with
cv2.cvtColor and writes OUT.avi with cv2.VideoWriter (MJPG), then prints the
frame count, the SHA-256 of the decoded grayscale frames and the size and
SHA-256 of OUT.avi. crates/torpor/tests/imaging.rs runs `gray` in torpor and
natively on the same input and compares the outputs byte for byte.
"""

import sys

from workloads import gray_video, make_video, sha256


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        frames = int(sys.argv[3]) if len(sys.argv) > 3 else 60
        width, height = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (320, 240)
        make_video(sys.argv[2], frames, width, height)
    elif len(sys.argv) == 4 and sys.argv[1] == "gray":
        frames, frames_sha = gray_video(sys.argv[2], sys.argv[3])
        with open(sys.argv[3], "rb") as f:
            data = f.read()
        print(f"frames={frames} gray_sha256={frames_sha} out_bytes={len(data)} out_sha256={sha256(data)}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
