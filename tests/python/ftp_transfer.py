#!/usr/bin/env python3
"""Download or upload one file with Python's ftplib, for the Sluice
integration tests (Python ftplib is one of the clients Sluice must serve).

    ftp_transfer.py get PORT REMOTE LOCAL [--active]
    ftp_transfer.py put PORT LOCAL REMOTE [--active]

Exits non-zero (with a traceback) on any error, including a final reply
that is not 2xx, which ftplib raises as an exception.
"""
import argparse
import ftplib
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("port", type=int)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--active", action="store_true", help="PORT instead of PASV")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()

    ftp = ftplib.FTP(timeout=60)
    ftp.connect(args.host, args.port)
    ftp.login()  # anonymous
    ftp.set_pasv(not args.active)
    if args.op == "get":
        with open(args.dst, "wb") as f:
            ftp.retrbinary("RETR " + args.src, f.write, blocksize=1 << 16)
    else:
        with open(args.src, "rb") as f:
            ftp.storbinary("STOR " + args.dst, f, blocksize=1 << 16)
    ftp.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
