# sniff.py IFACE SECONDS OUT: record (t, dir, proto, sport, dport, len) of every packet on IFACE
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
    pkttype = addr[2]  # 4 = outgoing
    if len(data) < 34 or data[12:14] != b'\x08\x00':
        continue
    ihl = (data[14] & 15) * 4
    proto = data[23]
    src = socket.inet_ntoa(data[26:30]); dst = socket.inet_ntoa(data[30:34])
    sp = dp = 0
    if proto in (6, 17):
        sp, dp = struct.unpack('!HH', data[14+ihl:14+ihl+4])
    rows.append((t, pkttype, proto, src, sp, dst, dp, len(data)))
with open(out, 'w') as f:
    for r in rows:
        f.write(' '.join(map(str, r)) + '\n')
