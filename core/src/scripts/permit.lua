for i = 1, #KEYS do
  if redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then return i end
end
return 0
