local r = {}
for i = 1, #KEYS do r[i] = redis.call("EXISTS", KEYS[i]) end
return r
