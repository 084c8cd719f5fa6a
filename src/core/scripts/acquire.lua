local n = tonumber(ARGV[3])
for i = 1, n do
  if redis.call("EXISTS", KEYS[i]) == 1 then return -i end
end
for i = 1, n do
  redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
if #KEYS > n then return redis.call("INCR", KEYS[n + 1]) end
return 0
