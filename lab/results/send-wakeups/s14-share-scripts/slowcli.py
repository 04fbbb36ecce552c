# N slow MODE S readers of one file over loopback (diagnosis of alone-vs-shared memory).
import socket, sys, time, threading, re
HOST = sys.argv[4] if len(sys.argv) > 4 else "127.0.0.1"
port, n, secs, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), 125000
def one():
    c = socket.create_connection((HOST, port)); f = c.makefile("rb")
    def cmd(s):
        if s: c.sendall(s.encode() + b"\r\n")
        while True:
            l = f.readline().decode()
            if l[3:4] == " ": return l
    cmd(None); cmd("USER anonymous"); cmd("PASS x"); cmd("TYPE I")
    r = cmd("PASV"); h = list(map(int, re.search(r"\((.*)\)", r).group(1).split(",")))
    d = socket.create_connection((HOST, h[4]*256+h[5]))
    c.sendall(b"RETR f64\r\n")
    t0 = time.time(); got = 0
    while time.time() - t0 < secs:
        want = int((time.time() - t0) * rate) - got
        if want > 0:
            b = d.recv(min(want, 65536)); got += len(b)
            if not b: break
        else: time.sleep(0.01)
    d.close(); c.close()
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start(); time.sleep(0.01)
for t in ts: t.join()
