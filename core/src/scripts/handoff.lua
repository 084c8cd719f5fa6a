local n = #KEYS / 2
local mine = "redlock-mux:reserved:" .. ARGV[3]
local keep = ARGV[4] == "0"
local me = false
if keep then me = ARGV[3] end
local held, gone = false, false
for i = 1, n do
  local v = redis.pcall("GET", KEYS[i]) if type(v) == "table" then v = "" end local bad = redis.call("TYPE", KEYS[n + i]).ok bad = bad ~= "zset" and bad ~= "none"
  if bad then elseif not keep then
    redis.call("ZREM", KEYS[n + i], ARGV[3])
  elseif not (v and v ~= ARGV[1] and string.sub(v, 1, 21) ~= "redlock-mux:reserved:" and redis.pcall("GET", "redlock-mux:served:" .. KEYS[i]) == ARGV[3] .. " " .. v) and tonumber(ARGV[5]) > 0 then
    redis.call("ZADD", KEYS[n + i], "NX", ARGV[5], ARGV[3])
  end
  if v == ARGV[1] or v == false or v == mine then
    if v ~= ARGV[1] then gone = true end
    if (bad or not ring(KEYS[i], KEYS[n + i], ARGV[2], me, ARGV[1], v == ARGV[1])) and v then
      redis.call("DEL", KEYS[i])
    end
  elseif redis.pcall("GET", "redlock-mux:taken:" .. KEYS[i]) ~= ARGV[1] then
    held = true
  end
end
if held then return 0 end
if gone then return -1 end
return 1
