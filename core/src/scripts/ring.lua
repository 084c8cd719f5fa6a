local function rang(id, msg)
  local n = redis.pcall("PUBLISH", "redlock-mux:bell:" .. id, msg)
  return type(n) == "number" and n > 0
end
local function ring(r, q, claim, me, tag, released, after)
  local marker = "redlock-mux:rung:" .. r
  local last = redis.pcall("GET", marker) if type(last) == "table" then last = false end
  for _ = 1, 1024 do
    local from = 0
    if after then
      local k = redis.call("ZRANK", q, after)
      if k then from = k + 1 end
    end
    local two = redis.call("ZRANGE", q, from, from + 1)
    local id = two[1]
    if id == nil then return false end
    if id ~= me and not after and not released and last and string.sub(last, 1, 19) == "redlock-mux:passed:" and string.sub(last, 20) == redis.call("ZRANGE", q, -1, -1)[1] then
      return false
    end
    if id ~= me and id == last and not released then
      redis.call("ZREM", q, id)
      last = false
    elseif id == me or rang(id, tag .. " " .. r) then
      redis.call("SET", r, "redlock-mux:reserved:" .. id, "PX", claim)
      redis.call("SET", marker, id == me and "redlock-mux:self" or id, "PX", claim * 16)
      if id ~= me and two[2] and two[2] ~= me then rang(two[2], "+ " .. r) end
      return id
    else
      redis.call("ZREM", q, id)
    end
  end
  return false
end
local function settle(keys, n, me, claim)
  local mine = "redlock-mux:reserved:" .. me
  local head, kept = true, false
  for i = 1, n do
    if redis.call("ZRANGE", keys[n + i], 0, 0)[1] ~= me then head = false end
  end
  for i = 1, n do
    if redis.call("GET", keys[i]) == mine then
      if head then
        redis.call("PEXPIRE", keys[i], claim)
        kept = true
      else
        redis.call("DEL", keys[i])
        if not ring(keys[i], keys[n + i], claim, false, me, false, me) then
          redis.call("SET", "redlock-mux:rung:" .. keys[i], "redlock-mux:passed:" .. me, "PX", claim * 16)
        end
      end
    end
  end
  return kept
end
