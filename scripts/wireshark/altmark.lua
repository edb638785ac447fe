-- Alternate Marking for Wireshark and tshark, as intswitch's AM-PM marks it:
--   * IPv6: the RFC 9343 AltMark option (type 0x12, length 4: FlowMonID(20)
--     L(1) D(1) reserved(10)) in a Hop-by-Hop or Destination Options
--     header. Wireshark 4.0 shows the option as unknown; this postdissector
--     adds its fields.
--   * IPv4 (and IPv6 by traffic class), where no standard encoding exists:
--     the carrier a flow's [[ampm.flow]] names, set in the preferences
--     (off by default: DSCP bits mean other things elsewhere): "dscp" (L
--     and D in DSCP bits l_bit / d_bit, 0 = DSCP LSB) or "ipv4_flag" (L in
--     the IPv4 flags' reserved bit, D in DSCP bit d_bit).
-- Fields: altmark.header (hbh | dest | dscp | ipv4_flag), altmark.flow_mon_id,
-- altmark.l, altmark.d, altmark.reserved.
-- Install: see scripts/wireshark/README.md.

local p_am = Proto("altmark", "Alternate Marking (RFC 9341/9343)")

local CARRIERS = { { 1, "none", 0 }, { 2, "dscp", 1 }, { 3, "ipv4_flag", 2 } }
p_am.prefs.v4_carrier = Pref.enum("IPv4 / traffic-class carrier", 0,
  "How flows without the IPv6 option carry their marks (the [[ampm.flow]] carrier)", CARRIERS, false)
p_am.prefs.l_bit = Pref.uint("L bit (DSCP bit, 0 = LSB)", 0, "[[ampm.flow]] l_bit")
p_am.prefs.d_bit = Pref.uint("D bit (DSCP bit, 0 = LSB)", 1, "[[ampm.flow]] d_bit")

local f = p_am.fields
f.header = ProtoField.string("altmark.header", "Carried in")
f.flow_mon_id = ProtoField.uint32("altmark.flow_mon_id", "FlowMonID", base.DEC, nil, 0xFFFFF000)
f.l = ProtoField.uint32("altmark.l", "L (loss: color)", base.DEC, nil, 0x00000800)
f.d = ProtoField.uint32("altmark.d", "D (delay)", base.DEC, nil, 0x00000400)
f.reserved = ProtoField.uint32("altmark.reserved", "Reserved", base.HEX, nil, 0x000003FF)
f.l_flag = ProtoField.uint8("altmark.l", "L (loss: color)", base.DEC)
f.d_flag = ProtoField.uint8("altmark.d", "D (delay)", base.DEC)

local e_len = ProtoExpert.new("altmark.bad_length", "AltMark option length is not 4", expert.group.MALFORMED,
  expert.severity.ERROR)
p_am.experts = { e_len }

local opt = Field.new("ipv6.opt")
local nxt = Field.new("ipv6.nxt")
local hbh = Field.new("ipv6.hopopts")
local dst = Field.new("ipv6.dstopts")
local dscp4 = Field.new("ip.dsfield.dscp")
local dscp6 = Field.new("ipv6.tclass.dscp")
local flags_rb = Field.new("ip.flags.rb")

-- Whether option `o` lies inside one of the header fields in `list`.
local function inside(o, list)
  for _, h in ipairs(list) do
    if h.range and o.offset >= h.offset and o.offset < h.offset + h.len then return true end
  end
  return false
end

function p_am.dissector(tvb, pinfo, tree)
  local found = false
  local hbhs, dsts = { hbh() }, { dst() }
  for _, o in ipairs({ opt() }) do
    local r = o.range
    if r and r:len() >= 2 and r(0, 1):uint() == 0x12 then
      local t = tree:add(p_am, r)
      t:add(f.header, inside(o, hbhs) and "hbh" or (inside(o, dsts) and "dest" or "ipv6 option")):set_generated()
      if r(1, 1):uint() ~= 4 or r:len() < 6 then
        t:add_proto_expert_info(e_len)
      else
        local data = r(2, 4)
        t:add(f.flow_mon_id, data)
        t:add(f.l, data)
        t:add(f.d, data)
        t:add(f.reserved, data)
        local v = data:uint()
        t:append_text(string.format(": FlowMonID %d, L %d, D %d", bit32.rshift(v, 12),
          bit32.band(bit32.rshift(v, 11), 1), bit32.band(bit32.rshift(v, 10), 1)))
      end
      found = true
    end
  end
  local carrier = p_am.prefs.v4_carrier
  if found or carrier == 0 then return end
  local d4, d6 = { dscp4() }, { dscp6() }
  local d = d4[1] or d6[1]
  if not d then return end
  local dscp = d.value
  local t = tree:add(p_am, d.range)
  local lb, db = p_am.prefs.l_bit, p_am.prefs.d_bit
  local dv = bit32.band(bit32.rshift(dscp, db), 1)
  if carrier == 2 then
    local rb = { flags_rb() }
    if not rb[1] then return end
    t:add(f.header, "ipv4_flag"):set_generated()
    t:add(f.l_flag, rb[1].range, rb[1].value and 1 or 0)
  else
    t:add(f.header, "dscp"):set_generated()
    t:add(f.l_flag, d.range, bit32.band(bit32.rshift(dscp, lb), 1))
  end
  t:add(f.d_flag, d.range, dv)
end

register_postdissector(p_am)
