"""What the self-tests of the repository checks (check_layout.py, check_references.py,
check_public_headers.py) share: a made-up tree in a temporary folder, and the verdict on what a
check reported in it."""
import os
import tempfile


def run_in_tree(files, check):
    """Writes `files` ({relative path: text}) into a temporary folder and returns check(folder)."""
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        return check(root)


def verdict(out, expected, ok, extra=()):
    """Prints what was reported (and `extra` lines); returns the exit status of the self-test."""
    print("\n".join(["self-test: reported:"] + list(out) + list(extra)))
    if not ok:
        print("self-test FAILED; expected:\n" + "\n".join(expected))
        return 1
    print("self-test passed")
    return 0
