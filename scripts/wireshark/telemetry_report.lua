-- Telemetry Report v2.0 (P4.org Telemetry Report Format, 2020-10) over UDP
-- to a configurable port (default 32766, the switches' collector port), as
-- intswitch sends them: an 8-byte group header, then individual reports,
-- each with its metadata (RepMdBits) and the truncated inner packet, which
-- Wireshark dissects by InType (Ethernet, IPv4, IPv6); the INT-MD stack in
-- it is then decoded by int_md.lua (load that one too).
-- Fields: tr.ver, tr.hw_id, tr.seq, tr.node_id, tr.reports, and per report
-- tr.rep_type, tr.in_type, tr.rep_len, tr.md_len, tr.d, tr.q, tr.f, tr.i,
-- tr.rep_md_bits, tr.ds_id, tr.ds_md_bits, tr.ds_md_status, the reporting
-- node's metadata (tr.ingress_port, tr.egress_port, tr.hop_latency,
-- tr.queue_id, tr.queue_occupancy, tr.ingress_ts, tr.egress_ts,
-- tr.l2_ingress, tr.l2_egress, tr.tx_util, tr.buffer_id,
-- tr.buffer_occupancy, tr.drop_reason), tr.inner_len.
-- Install: see scripts/wireshark/README.md.

local p_tr = Proto("int_tr", "Telemetry Report v2.0")

p_tr.prefs.udp_port = Pref.uint("UDP port", 32766, "UDP destination port of the reports (the collectors' port)")

local REP = { [0] = "inner only", [1] = "INT", [2] = "IOAM" }
local IN = { [0] = "none", [1] = "TLV", [2] = "domain specific", [3] = "Ethernet", [4] = "IPv4", [5] = "IPv6" }

local f = p_tr.fields
f.ver = ProtoField.uint32("tr.ver", "Version", base.DEC, nil, 0xF0000000)
f.hw_id = ProtoField.uint32("tr.hw_id", "Hardware ID", base.DEC, nil, 0x0FC00000)
f.seq = ProtoField.uint32("tr.seq", "Sequence number", base.DEC, nil, 0x003FFFFF)
f.node_id = ProtoField.uint32("tr.node_id", "Node ID", base.DEC)
f.reports = ProtoField.uint8("tr.reports", "Individual reports", base.DEC)
f.report = ProtoField.none("tr.report", "Individual report")
f.rep_type = ProtoField.uint8("tr.rep_type", "RepType", base.DEC, REP, 0xF0)
f.in_type = ProtoField.uint8("tr.in_type", "InType", base.DEC, IN, 0x0F)
f.rep_len = ProtoField.uint8("tr.rep_len", "Report length (words after the first)", base.DEC)
f.md_len = ProtoField.uint8("tr.md_len", "MD length (words)", base.DEC)
f.d = ProtoField.bool("tr.d", "D (dropped)", 8, nil, 0x80)
f.q = ProtoField.bool("tr.q", "Q (congested queue)", 8, nil, 0x40)
f.f = ProtoField.bool("tr.f", "F (tracked flow)", 8, nil, 0x20)
f.i = ProtoField.bool("tr.i", "I (intermediate)", 8, nil, 0x10)
f.rep_md_bits = ProtoField.uint16("tr.rep_md_bits", "RepMdBits", base.HEX)
f.ds_id = ProtoField.uint16("tr.ds_id", "Domain specific ID", base.HEX)
f.ds_md_bits = ProtoField.uint16("tr.ds_md_bits", "DSMdBits", base.HEX)
f.ds_md_status = ProtoField.uint16("tr.ds_md_status", "DSMdStatus", base.HEX)
f.inner_len = ProtoField.uint16("tr.inner_len", "Inner packet bytes (truncated)", base.DEC)
-- The reporting node's metadata (RepMdBits: the INT bit positions; bit 15
-- queue ID + drop reason).
f.ig_port = ProtoField.uint16("tr.ingress_port", "Level-1 ingress interface", base.DEC)
f.eg_port = ProtoField.uint16("tr.egress_port", "Level-1 egress interface", base.DEC)
f.latency = ProtoField.uint32("tr.hop_latency", "Hop latency (ns)", base.DEC)
f.qid = ProtoField.uint8("tr.queue_id", "Queue ID", base.DEC)
f.qocc = ProtoField.uint24("tr.queue_occupancy", "Queue occupancy", base.DEC)
f.ig_ts = ProtoField.uint64("tr.ingress_ts", "Ingress timestamp (ns)", base.DEC)
f.eg_ts = ProtoField.uint64("tr.egress_ts", "Egress timestamp (ns)", base.DEC)
f.l2_ig = ProtoField.uint32("tr.l2_ingress", "Level-2 ingress interface", base.DEC)
f.l2_eg = ProtoField.uint32("tr.l2_egress", "Level-2 egress interface", base.DEC)
f.tx_util = ProtoField.uint32("tr.tx_util", "Egress TX utilisation", base.DEC)
f.buf_id = ProtoField.uint8("tr.buffer_id", "Buffer ID", base.DEC)
f.buf_occ = ProtoField.uint24("tr.buffer_occupancy", "Buffer occupancy", base.DEC)
f.drop_reason = ProtoField.uint8("tr.drop_reason", "Drop reason", base.DEC)
f.reserved = ProtoField.uint32("tr.reserved_md", "Reserved metadata", base.HEX)
f.node_md = ProtoField.uint32("tr.md_node_id", "Node ID (RepMdBits bit 0, reserved)", base.DEC)

local e_bad = ProtoExpert.new("tr.malformed", "Malformed telemetry report", expert.group.MALFORMED, expert.severity.ERROR)
p_tr.experts = { e_bad }

local INNER = { [3] = "eth_withoutfcs", [4] = "ip", [5] = "ipv6" }

function p_tr.dissector(tvb, pinfo, tree)
  if tvb:len() < 8 then return 0 end
  if bit32.rshift(tvb(0, 1):uint(), 4) ~= 2 then return 0 end
  pinfo.cols.protocol:set("TR")
  local t = tree:add(p_tr, tvb())
  local g = t:add(tvb(0, 8), "Group header")
  g:add(f.ver, tvb(0, 4))
  g:add(f.hw_id, tvb(0, 4))
  g:add(f.seq, tvb(0, 4))
  g:add(f.node_id, tvb(4, 4))
  local o, n = 8, 0
  while o + 4 <= tvb:len() do
    local len = tvb(o + 1, 1):uint()
    local md = tvb(o + 2, 1):uint()
    local stop = (len == 0xFF) and tvb:len() or (o + 4 + 4 * len)
    local rt = t:add(f.report, tvb(o, math.min(stop, tvb:len()) - o))
    rt:set_text(string.format("Individual report %d", n))
    rt:add(f.rep_type, tvb(o, 1))
    rt:add(f.in_type, tvb(o, 1))
    rt:add(f.rep_len, tvb(o + 1, 1))
    rt:add(f.md_len, tvb(o + 2, 1))
    rt:add(f.d, tvb(o + 3, 1))
    rt:add(f.q, tvb(o + 3, 1))
    rt:add(f.f, tvb(o + 3, 1))
    rt:add(f.i, tvb(o + 3, 1))
    if stop > tvb:len() or stop < o + 12 + 4 * md then
      rt:add_proto_expert_info(e_bad, string.format("report of %d bytes with %d metadata words runs past the packet",
        stop - o, md))
      break
    end
    local rep_type = bit32.rshift(tvb(o, 1):uint(), 4)
    local in_type = bit32.band(tvb(o, 1):uint(), 0x0F)
    local bits = tvb(o + 4, 2):uint()
    rt:add(f.rep_md_bits, tvb(o + 4, 2))
    rt:add(f.ds_id, tvb(o + 6, 2))
    rt:add(f.ds_md_bits, tvb(o + 8, 2))
    rt:add(f.ds_md_status, tvb(o + 10, 2))
    if md > 0 then
      local mt = rt:add(tvb(o + 12, 4 * md), "Metadata")
      local F = setmetatable({ node_id = f.node_md, csum_comp = f.reserved }, { __index = f })
      local used = _G.intswitch_int_metadata and _G.intswitch_int_metadata(F, mt, tvb, o + 12, bits, true)
      if used and used ~= 4 * md then
        mt:add_proto_expert_info(e_bad, string.format("MD length %d words, RepMdBits 0x%04x need %d bytes",
          md, bits, used))
      end
    end
    local inner = o + 12 + 4 * md
    local inner_len = stop - inner
    rt:add(f.inner_len, inner_len):set_generated()
    rt:append_text(string.format(": %s, inner %s, %d bytes", REP[rep_type] or "?", IN[in_type] or "?", inner_len))
    if inner_len > 0 and INNER[in_type] then
      local d = Dissector.get(INNER[in_type])
      -- The inner packet is truncated: its own lengths run past these bytes.
      pcall(function() d:call(tvb(inner, inner_len):tvb(), pinfo, rt) end)
    end
    n = n + 1
    o = stop
  end
  t:add(f.reports, n):set_generated()
  pinfo.cols.protocol:set("TR")
  pinfo.cols.info:set(string.format("Telemetry Report node %d seq %d, %d reports",
    tvb(4, 4):uint(), bit32.band(tvb(0, 4):uint(), 0x3FFFFF), n))
  return tvb:len()
end

-- (int_md.lua, loaded first, keeps the port in step with the preference.)
if _G.intswitch_follow_udp_port then
  _G.intswitch_follow_udp_port(p_tr)
else
  DissectorTable.get("udp.port"):add(p_tr.prefs.udp_port, p_tr)
end
