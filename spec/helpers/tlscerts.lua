-- Certificates for TLS specs, made with openssl and keytool into a temp
-- dir: a CA the server trusts, the server's certificate (127.0.0.1,
-- localhost) in the PKCS12 key store ZooKeeper reads and the CA in its
-- PKCS12 trust store, client certificates signed by that CA, and a second
-- CA the server does not know, with a client certificate of its own.
-- EC P-256 keys: a few milliseconds each.
local proc = require(((...) or "helpers.tlscerts"):match("^(.-)[^.]*$") .. "proc")

local shquote = proc.shquote

local _M = {}

local Certs = {}
Certs.__index = Certs

local STORE_PASSWORD = "zkcoord-test"
local DAYS = "2"


local function run(cmd)
    local out = os.tmpname()
    local r = os.execute(cmd .. " >" .. out .. " 2>&1")
    local text = proc.read_file(out) or ""
    os.remove(out)
    if r ~= 0 and r ~= true then
        error("tlscerts: " .. cmd .. " failed:\n" .. text, 3)
    end
end


local function newkey(key)
    return ("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout %s")
        :format(shquote(key))
end


-- A CA: <dir>/<name>.pem and <name>.key.
local function make_ca(dir, name)
    local pem, key = dir .. "/" .. name .. ".pem", dir .. "/" .. name .. ".key"
    run(("%s -x509 -days %s -subj %s -out %s"):format(newkey(key), DAYS,
        shquote("/CN=zkcoord " .. name), shquote(pem)))
    return { certfile = pem, keyfile = key }
end


-- A certificate for `subject` signed by `ca`, with the extensions in `ext`
-- (openssl's extfile lines) if any.
local function make_leaf(dir, name, subject, ca, ext)
    local pem, key, csr = dir .. "/" .. name .. ".pem", dir .. "/" .. name .. ".key",
        dir .. "/" .. name .. ".csr"
    run(("%s -subj %s -out %s"):format(newkey(key), shquote(subject), shquote(csr)))
    local extarg = ""
    if ext then
        local extfile = dir .. "/" .. name .. ".ext"
        assert(proc.write_file(extfile, ext .. "\n"))
        extarg = " -extfile " .. shquote(extfile)
    end
    run(("openssl x509 -req -in %s -CA %s -CAkey %s -CAcreateserial -days %s -out %s%s")
        :format(shquote(csr), shquote(ca.certfile), shquote(ca.keyfile), DAYS,
                shquote(pem), extarg))
    os.remove(csr)
    return { certfile = pem, keyfile = key, subject = subject }
end


--- A client certificate signed by the trusted CA (or `other` = true: by
--- the CA the server does not trust), subject "/CN=<name>":
--- { certfile =, keyfile =, subject =, id = "CN=<name>" (x509's ACL id) }.
function Certs:client(name, other)
    local key = (other and "other-" or "") .. name
    if not self.clients[key] then
        local c = make_leaf(self.dir, key, "/CN=" .. name, other and self.other_ca or self.ca_pair)
        c.id = "CN=" .. name
        self.clients[key] = c
    end
    return self.clients[key]
end


--- The client key of `name` encrypted with `password` (AES-256, PEM).
function Certs:encrypted_key(name, password)
    local c = self:client(name)
    local out = self.dir .. "/" .. name .. "-encrypted.key"
    run(("openssl pkey -in %s -aes256 -passout %s -out %s"):format(shquote(c.keyfile),
        shquote("pass:" .. password), shquote(out)))
    return out
end


--- zoo.cfg lines of a TLS port `port` that needs a client certificate,
--- with the x509 scheme for ACLs.
function Certs:server_lines(port)
    return {
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        "secureClientPort=" .. port,
        "secureClientPortAddress=127.0.0.1",
        "ssl.keyStore.location=" .. self.keystore,
        "ssl.keyStore.password=" .. STORE_PASSWORD,
        "ssl.keyStore.type=PKCS12",
        "ssl.trustStore.location=" .. self.truststore,
        "ssl.trustStore.password=" .. STORE_PASSWORD,
        "ssl.trustStore.type=PKCS12",
        "ssl.clientAuth=need",
        "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    }
end


function Certs:destroy()
    proc.rm_rf(self.dir)
end


--- Makes the CAs, the server's stores and the directory they are in.
function _M.make()
    local dir = assert(proc.mktemp_dir("zkcoord-tls-"))
    local self = setmetatable({ dir = dir, clients = {} }, Certs)
    self.ca_pair = make_ca(dir, "ca")
    self.ca = self.ca_pair.certfile
    self.other_ca = make_ca(dir, "other-ca")
    local server = make_leaf(dir, "server", "/CN=localhost", self.ca_pair,
        "subjectAltName=IP:127.0.0.1,DNS:localhost")
    self.keystore = dir .. "/server.p12"
    run(("openssl pkcs12 -export -in %s -inkey %s -certfile %s -name server -passout %s -out %s")
        :format(shquote(server.certfile), shquote(server.keyfile), shquote(self.ca),
                shquote("pass:" .. STORE_PASSWORD), shquote(self.keystore)))
    self.truststore = dir .. "/trust.p12"
    run(("keytool -importcert -noprompt -alias ca -file %s -keystore %s -storetype PKCS12 "
         .. "-storepass %s"):format(shquote(self.ca), shquote(self.truststore),
                                    shquote(STORE_PASSWORD)))
    return self
end


return _M
