local held, gone = false, false
for i = 1, #KEYS do
  local v = redis.pcall("GET", KEYS[i]) if type(v) == "table" then v = "" end
  if v == ARGV[1] then redis.call("DEL", KEYS[i])
  elseif v == false then gone = true
  else held = true end
end
if held then return 0 end
if gone then return -1 end
return 1
