import re, sys, glob, statistics as st
for f in sorted(glob.glob(sys.argv[1] + '/ss-*.txt')):
    txt = open(f).read()
    ns = [int(x) for x in re.findall(r'notsent:(\d+)', txt)]
    tb = [int(x) for x in re.findall(r'tb(\d+)', txt)]
    w = [int(x) for x in re.findall(r',w(\d+),', txt)]
    un = [int(x) for x in re.findall(r'unacked:(\d+)', txt)]
    q = lambda v, p: sorted(v)[int(p * (len(v) - 1))] if v else None
    print(f, 'sockets', len(tb), 'with notsent', len(ns))
    for name, v in [('notsent', ns), ('tb', tb), ('wmem_queued', w), ('unacked segs', un)]:
        if v:
            print('  %-12s p10 %s p50 %s p90 %s max %s' % (name, q(v, .1), q(v, .5), q(v, .9), max(v)))
