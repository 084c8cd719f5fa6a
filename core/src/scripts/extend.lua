local gone = false
for i = 1, #KEYS do
  local v = redis.pcall("GET", KEYS[i])
  if v == false then gone = true elseif v ~= ARGV[1] then return 0 end
end
if gone then return -1 end
for i = 1, #KEYS do redis.call("PEXPIRE", KEYS[i], ARGV[2]) end
return 1
