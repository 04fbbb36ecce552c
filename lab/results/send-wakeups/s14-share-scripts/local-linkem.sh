# The local pair of namespaces evict.sh runs in (session 14, helper share; not the lab's):
# server shr-s 10.99.0.1, clients shr-c 10.99.0.2, joined by linkem with 100 ms RTT and MTU 9000,
# the lab's TCP buffer sysctls in both.
ip netns add shr-s; ip netns add shr-c
for ns in shr-s shr-c; do
  ip netns exec $ns sysctl -q -w net.ipv4.tcp_rmem="4096 131072 33554432" net.ipv4.tcp_wmem="4096 16384 4194304"
  ip -n $ns link set lo up
done
linkem run --a-ns shr-s --a-addr 10.99.0.1/24 --a-if shA --b-ns shr-c --b-addr 10.99.0.2/24 --b-if shB \
  --ctl /work/wt-scratch/share/lk.ctl --mtu 9000 --delay 50ms &
