if redis.call("SET", KEYS[1], ARGV[6], "NX", "PX", ARGV[5]) then
  if KEYS[3] then return redis.call("INCR", KEYS[3]) end
  return 0
end
