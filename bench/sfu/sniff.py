# sniff.py IFACE SECONDS OUT: (t, dir, proto, src, sport, dst, dport, len, tcpseq) of every packet on IFACE (AF_PACKET; on egress: what the queue let through)
import socket, struct, sys, time
iface, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(3))
s.bind((iface, 0))
s.settimeout(0.5)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
end = time.time() + secs
rows = []
while time.time() < end:
    try:
        data, addr = s.recvfrom(65535)
    except socket.timeout:
        continue
    t = time.time()
    if len(data) < 34 or data[12:14] != b'\x08\x00':
        continue
    ihl = (data[14] & 15) * 4
    proto = data[23]
    tot = struct.unpack('!H', data[16:18])[0]
    src = socket.inet_ntoa(data[26:30]); dst = socket.inet_ntoa(data[30:34])
    sp = dp = 0; seq = 0
    if proto in (6, 17):
        sp, dp = struct.unpack('!HH', data[14+ihl:14+ihl+4])
    if proto == 6:
        seq = struct.unpack('!I', data[14+ihl+4:14+ihl+8])[0]
    rows.append((t, addr[2], proto, src, sp, dst, dp, max(len(data), tot + 14), seq))
with open(out, 'w') as f:
    for r in rows:
        f.write(' '.join(map(str, r)) + '\n')
