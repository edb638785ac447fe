-- INT-MD v2.1 (P4.org In-band Network Telemetry, "INT over TCP/UDP") for
-- Wireshark and tshark, as intswitch puts it on the wire:
--   * over UDP to a configurable port (default 17768): NPT 1 (the original
--     UDP destination port saved in the shim) and NPT 2 (a UDP header
--     inserted before the original L4 header, its protocol saved);
--   * by DSCP (NPT 0): a configurable codepoint or bit; the INT block right
--     after the UDP header or after the TCP header and its options.
-- Fields: int.shim.*, int.ver, int.d/e/m, int.hopml, int.rhc, int.bitmap,
-- int.ds_id, int.ds_instruction, int.ds_flags, int.hops, and per hop
-- int.node_id, int.ingress_port, int.egress_port, int.hop_latency,
-- int.queue_id, int.queue_occupancy, int.ingress_ts, int.egress_ts,
-- int.l2_ingress, int.l2_egress, int.tx_util, int.buffer_id,
-- int.buffer_occupancy, int.reserved_md, int.checksum_complement.
-- Install: see scripts/wireshark/README.md.

local p_int = Proto("int_md", "In-band Network Telemetry (INT-MD v2.1)")

p_int.prefs.udp_port = Pref.uint("UDP port", 17768, "UDP destination port that marks INT (the switches' int.udp_port)")
p_int.prefs.dscp_enabled = Pref.bool("Detect INT by DSCP", true,
  "Also look for INT (NPT 0) in TCP and UDP packets whose DSCP matches (the switches' presence = \"dscp\")")
p_int.prefs.dscp_value = Pref.uint("DSCP value", 0x17, "DSCP & mask == value marks INT (int.dscp_value)")
p_int.prefs.dscp_mask = Pref.uint("DSCP mask", 0x3f, "Bits of the DSCP compared (int.dscp_mask)")

local NPT = { [0] = "DSCP (original DSCP saved)", [1] = "UDP (original destination port saved)",
              [2] = "inserted UDP (original IP protocol saved)", [3] = "reserved" }
local TYPES = { [1] = "INT-MD", [3] = "INT-MX" }

local f = p_int.fields
f.shim_type = ProtoField.uint8("int.shim.type", "Type", base.DEC, TYPES, 0xF0)
f.shim_npt = ProtoField.uint8("int.shim.npt", "NPT", base.DEC, NPT, 0x0C)
f.shim_len = ProtoField.uint8("int.shim.len", "Length (words after the shim)", base.DEC)
f.shim_dport = ProtoField.uint16("int.shim.orig_dport", "Original UDP destination port", base.DEC)
f.shim_proto = ProtoField.uint8("int.shim.orig_proto", "Original IP protocol", base.DEC)
f.shim_dscp = ProtoField.uint8("int.shim.orig_dscp", "Original DSCP", base.HEX, nil, 0xFC)
f.ver = ProtoField.uint8("int.ver", "Version", base.DEC, nil, 0xF0)
f.d = ProtoField.bool("int.d", "D (discard at sink)", 8, nil, 0x08)
f.e = ProtoField.bool("int.e", "E (hop count exceeded)", 8, nil, 0x04)
f.m = ProtoField.bool("int.m", "M (MTU exceeded)", 8, nil, 0x02)
f.hopml = ProtoField.uint8("int.hopml", "HopML (words per hop)", base.DEC, nil, 0x1F)
f.rhc = ProtoField.uint8("int.rhc", "Remaining hop count", base.DEC)
f.bitmap = ProtoField.uint16("int.bitmap", "Instruction bitmap", base.HEX)
f.ds_id = ProtoField.uint16("int.ds_id", "Domain specific ID", base.HEX)
f.ds_instr = ProtoField.uint16("int.ds_instruction", "DS instruction", base.HEX)
f.ds_flags = ProtoField.uint16("int.ds_flags", "DS flags", base.HEX)
f.hops = ProtoField.uint8("int.hops", "Hops in the stack", base.DEC)
f.hop = ProtoField.none("int.hop", "Hop")
f.node_id = ProtoField.uint32("int.node_id", "Node ID", base.DEC)
f.ig_port = ProtoField.uint16("int.ingress_port", "Level-1 ingress interface", base.DEC)
f.eg_port = ProtoField.uint16("int.egress_port", "Level-1 egress interface", base.DEC)
f.latency = ProtoField.uint32("int.hop_latency", "Hop latency (ns)", base.DEC)
f.qid = ProtoField.uint8("int.queue_id", "Queue ID", base.DEC)
f.qocc = ProtoField.uint24("int.queue_occupancy", "Queue occupancy", base.DEC)
f.ig_ts = ProtoField.uint64("int.ingress_ts", "Ingress timestamp (ns)", base.DEC)
f.eg_ts = ProtoField.uint64("int.egress_ts", "Egress timestamp (ns)", base.DEC)
f.l2_ig = ProtoField.uint32("int.l2_ingress", "Level-2 ingress interface", base.DEC)
f.l2_eg = ProtoField.uint32("int.l2_egress", "Level-2 egress interface", base.DEC)
f.tx_util = ProtoField.uint32("int.tx_util", "Egress TX utilisation", base.DEC)
f.buf_id = ProtoField.uint8("int.buffer_id", "Buffer ID", base.DEC)
f.buf_occ = ProtoField.uint24("int.buffer_occupancy", "Buffer occupancy", base.DEC)
f.reserved = ProtoField.uint32("int.reserved_md", "Reserved instruction's value", base.HEX)
f.csum_comp = ProtoField.uint32("int.checksum_complement", "Checksum complement", base.HEX)

local e_bad = ProtoExpert.new("int.malformed", "Malformed INT block", expert.group.MALFORMED, expert.severity.ERROR)
p_int.experts = { e_bad }

-- Bitmap bits 0-8: (bytes, function adding the fields of table F).
local INSTR = {
  [0] = { 4, function(F, t, r) t:add(F.node_id, r) end },
  [1] = { 4, function(F, t, r) t:add(F.ig_port, r(0, 2)); t:add(F.eg_port, r(2, 2)) end },
  [2] = { 4, function(F, t, r) t:add(F.latency, r) end },
  [3] = { 4, function(F, t, r) t:add(F.qid, r(0, 1)); t:add(F.qocc, r(1, 3)) end },
  [4] = { 8, function(F, t, r) t:add(F.ig_ts, r) end },
  [5] = { 8, function(F, t, r) t:add(F.eg_ts, r) end },
  [6] = { 8, function(F, t, r) t:add(F.l2_ig, r(0, 4)); t:add(F.l2_eg, r(4, 4)) end },
  [7] = { 4, function(F, t, r) t:add(F.tx_util, r) end },
  [8] = { 4, function(F, t, r) t:add(F.buf_id, r(0, 1)); t:add(F.buf_occ, r(1, 3)) end },
}

-- Words one hop takes for `bitmap`.
local function words_of(bitmap)
  local n = 0
  for bit = 0, 15 do
    if bit32.band(bitmap, bit32.rshift(0x8000, bit)) ~= 0 then
      n = n + ((INSTR[bit] and INSTR[bit][1]) or 4) / 4
    end
  end
  return n
end

-- One hop's metadata into the fields of table F (also the reports'
-- metadata, with bit 15 read as queue ID + drop reason when `bit15_drop`).
-- Returns the bytes used, or nil when they run past the tvb.
local function add_metadata(F, tree, tvb, offset, bitmap, bit15_drop)
  local o = offset
  for bit = 0, 15 do
    if bit32.band(bitmap, bit32.rshift(0x8000, bit)) ~= 0 then
      local spec = INSTR[bit]
      local size = (spec and spec[1]) or 4
      if o + size > tvb:len() then return nil end
      local r = tvb(o, size)
      if spec then
        spec[2](F, tree, r)
      elseif bit == 15 and bit15_drop then
        tree:add(F.qid, r(0, 1))
        tree:add(F.drop_reason, r(1, 1))
      elseif bit == 15 then
        tree:add(F.csum_comp, r)
      else
        tree:add(F.reserved, r)
      end
      o = o + size
    end
  end
  return o - offset
end

-- Dissects the INT block at `offset` of `tvb`. Returns (bytes, npt, saved)
-- or nil when it is not a v2 INT-MD block.
local function dissect_block(tvb, pinfo, tree, offset)
  if tvb:len() < offset + 16 then return nil end
  local b0 = tvb(offset, 1):uint()
  local len_words = tvb(offset + 1, 1):uint()
  local npt = bit32.band(bit32.rshift(b0, 2), 3)
  if bit32.rshift(b0, 4) ~= 1 or bit32.rshift(tvb(offset + 4, 1):uint(), 4) ~= 2 then return nil end
  local block_len = 4 + 4 * len_words
  local t = tree:add(p_int, tvb(offset, math.min(block_len, tvb:len() - offset)))
  local shim = t:add(tvb(offset, 4), "Shim")
  shim:add(f.shim_type, tvb(offset, 1))
  shim:add(f.shim_npt, tvb(offset, 1))
  shim:add(f.shim_len, tvb(offset + 1, 1))
  if npt == 1 then
    shim:add(f.shim_dport, tvb(offset + 2, 2))
  elseif npt == 2 then
    shim:add(f.shim_proto, tvb(offset + 3, 1))
  elseif npt == 0 then
    shim:add(f.shim_dscp, tvb(offset + 3, 1))
  end
  local h = offset + 4
  local hdr = t:add(tvb(h, 12), "INT-MD header")
  hdr:add(f.ver, tvb(h, 1))
  hdr:add(f.d, tvb(h, 1))
  hdr:add(f.e, tvb(h, 1))
  hdr:add(f.m, tvb(h, 1))
  hdr:add(f.hopml, tvb(h + 2, 1))
  hdr:add(f.rhc, tvb(h + 3, 1))
  hdr:add(f.bitmap, tvb(h + 4, 2))
  hdr:add(f.ds_id, tvb(h + 6, 2))
  hdr:add(f.ds_instr, tvb(h + 8, 2))
  hdr:add(f.ds_flags, tvb(h + 10, 2))
  local hopml = bit32.band(tvb(h + 2, 1):uint(), 0x1F)
  local bitmap = tvb(h + 4, 2):uint()
  local stack = block_len - 16
  if len_words < 3 or offset + block_len > tvb:len() or hopml == 0 or stack % (4 * hopml) ~= 0
      or words_of(bitmap) ~= hopml then
    t:add_proto_expert_info(e_bad, string.format("length %d words, HopML %d, bitmap 0x%04x, %d bytes left",
      len_words, hopml, bitmap, tvb:len() - offset))
    return math.min(block_len, tvb:len() - offset), npt, nil
  end
  local n = stack / (4 * hopml)
  t:add(f.hops, n):set_generated()
  for i = 0, n - 1 do
    local o = h + 12 + i * 4 * hopml
    local ht = t:add(f.hop, tvb(o, 4 * hopml))
    ht:set_text(string.format("Hop %d (newest first)", i))
    add_metadata(f, ht, tvb, o, bitmap, false)
    if bit32.band(bitmap, 0x8000) ~= 0 then
      ht:append_text(string.format(": node %d", tvb(o, 4):uint()))
    end
  end
  t:append_text(string.format(", %d hops, bitmap 0x%04x, NPT %d", n, bitmap, npt))
  pinfo.cols.protocol:set("INT")
  return block_len, npt, tvb(offset + 2, 2):uint()
end

-- The rest of the packet after the block: the original L4 (NPT 2) or payload.
local function rest(tvb, pinfo, tree, offset, npt, saved)
  if offset >= tvb:len() then return end
  local sub = tvb(offset):tvb()
  if npt == 2 and saved then
    local proto = bit32.band(saved, 0xFF)
    if DissectorTable.get("ip.proto"):try(proto, sub, pinfo, tree) then return end
  elseif npt == 1 and saved then
    if DissectorTable.get("udp.port"):try(saved, sub, pinfo, tree) then return end
  end
  Dissector.get("data"):call(sub, pinfo, tree)
end

-- INT over UDP (the UDP port table): NPT 1 or 2.
function p_int.dissector(tvb, pinfo, tree)
  local used, npt, saved = dissect_block(tvb, pinfo, tree, 0)
  if not used then return 0 end
  rest(tvb, pinfo, tree, used, npt, saved)
  return tvb:len()
end

local dscp4 = Field.new("ip.dsfield.dscp")
local dscp6 = Field.new("ipv6.tclass.dscp")
local ip_proto = Field.new("ip.proto")

-- The innermost IP header's DSCP (a report's inner packet sits inside another).
local function current_dscp()
  local v4, v6 = { dscp4() }, { dscp6() }
  local a, b = v4[#v4], v6[#v6]
  if a and b then
    return (a.offset > b.offset) and a.value or b.value
  end
  return (a and a.value) or (b and b.value)
end

-- INT by DSCP (heuristic on TCP and UDP payloads): NPT 0.
local function heuristic(tvb, pinfo, tree)
  if not p_int.prefs.dscp_enabled then return false end
  local d = current_dscp()
  if not d or bit32.band(d, p_int.prefs.dscp_mask) ~= p_int.prefs.dscp_value then return false end
  if tvb:len() < 16 then return false end
  local b0 = tvb(0, 1):uint()
  if bit32.rshift(b0, 4) ~= 1 or bit32.band(bit32.rshift(b0, 2), 3) ~= 0 then return false end
  local used = dissect_block(tvb, pinfo, tree, 0)
  if not used then return false end
  if used < tvb:len() then Dissector.get("data"):call(tvb(used):tvb(), pinfo, tree) end
  return true
end

p_int:register_heuristic("udp", heuristic)
p_int:register_heuristic("tcp", heuristic)

-- Keeps `proto` on the UDP port its udp_port preference names, also when
-- the preference changes (telemetry_report.lua uses it too).
function _G.intswitch_follow_udp_port(proto)
  local registered = proto.prefs.udp_port
  DissectorTable.get("udp.port"):add(registered, proto)
  proto.prefs_changed = function()
    if registered ~= proto.prefs.udp_port then
      local t = DissectorTable.get("udp.port")
      t:remove(registered, proto)
      registered = proto.prefs.udp_port
      t:add(registered, proto)
    end
  end
end
_G.intswitch_follow_udp_port(p_int)

-- Shared with telemetry_report.lua (the reports' metadata uses the same bits).
_G.intswitch_int_metadata = add_metadata
