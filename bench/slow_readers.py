# Diagnostic client for bench/slow_readers.sh (not a lab measurement).
# Diagnostic (not a lab measurement): N FTP clients each read one shared file
# at RATE bytes/s in 20 reads a second (as the lab's load client does), for SECS.
import ftplib, socket, sys, threading, time
host, port, n, rate, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def one(i):
    f = ftplib.FTP(); f.connect(host, port); f.login()
    s = f.transfercmd("RETR f.bin")
    chunk = rate // 20; began = time.time(); got = 0
    while time.time() - began < secs:
        allowed = began + got / rate
        now = time.time()
        if allowed > now:
            time.sleep(min(allowed - now, 0.05)); continue
        b = s.recv(chunk)
        if not b: break
        got += len(b)
    s.close()
for i in range(n):
    threading.Thread(target=one, args=(i,), daemon=True).start(); time.sleep(0.02)
time.sleep(secs + 1)
