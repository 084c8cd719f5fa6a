local n = #KEYS - 1
local gone = false
for i = 1, n do
  local v = redis.pcall("GET", KEYS[i])
  if v == false then gone = true elseif v ~= ARGV[1] then return 0 end
end
if gone then return -1 end
local c, t = redis.call("GET", KEYS[n + 1]), ARGV[2]
if not c or #c < #t or (#c == #t and c < t) then redis.call("SET", KEYS[n + 1], t) end
return 1
