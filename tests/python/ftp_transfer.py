#!/usr/bin/env python3
"""Download or upload one file with Python's ftplib, for the Sluice
integration tests (Python ftplib is one of the clients Sluice must serve).

    ftp_transfer.py get PORT REMOTE LOCAL [--active]
    ftp_transfer.py put PORT LOCAL REMOTE [--active]
    ... --tls CAFILE: explicit FTPS (FTP_TLS: AUTH TLS, PBSZ 0, PROT P),
        the server's certificate checked against CAFILE

Exits non-zero (with a traceback) on any error, including a final reply
that is not 2xx, which ftplib raises as an exception.
"""
import argparse
import ftplib
import ssl
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["get", "put"])
    ap.add_argument("port", type=int)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--active", action="store_true", help="PORT instead of PASV")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--tls", metavar="CAFILE", help="FTP_TLS with PROT P")
    args = ap.parse_args()

    if args.tls:
        ctx = ssl.create_default_context(cafile=args.tls)
        ftp = ftplib.FTP_TLS(timeout=60, context=ctx)
    else:
        ftp = ftplib.FTP(timeout=60)
    ftp.connect(args.host, args.port)
    ftp.login()  # anonymous (FTP_TLS: AUTH TLS first)
    if args.tls:
        ftp.prot_p()
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
