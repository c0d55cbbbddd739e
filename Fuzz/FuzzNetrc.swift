// libFuzzer harness for the netrc tokenizer and parser (HTTPWire.NetrcFile).
//
// Compiled by Scripts/fuzz.sh into the one fuzz binary with Sources/HTTPWire/*.swift. The input is
// the file's text. Besides "never crash": parsing is deterministic, machine names are lower-cased, and
// writing the entries back with quoted tokens and parsing that gives the same entries.

/// A quoted netrc token with the escapes the tokenizer understands.
func netrcQuoted(_ text: String) -> String {
    var result = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": result += "\\\""
        case "\\": result += "\\\\"
        case "\n": result += "\\n"
        case "\r": result += "\\r"
        case "\t": result += "\\t"
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result + "\""
}

func netrcText(_ entries: [NetrcFile.Entry]) -> String {
    var text = ""
    for entry in entries {
        text += entry.machine.map { "machine " + netrcQuoted($0) } ?? "default"
        if let login = entry.login { text += " login " + netrcQuoted(login) }
        if let password = entry.password { text += " password " + netrcQuoted(password) }
        if let account = entry.account { text += " account " + netrcQuoted(account) }
        text += "\n"
    }
    return text
}

/// One input (Fuzz/FuzzMain.swift calls it when the binary runs as `fuzz-netrc`).
func fuzzNetrc(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let netrc = try? NetrcFile(parsing: text) else { return 0 }
    check((try? NetrcFile(parsing: text)) == netrc, "parsing is deterministic")
    for entry in netrc.entries {
        if let machine = entry.machine { check(!machine.utf8.contains { $0 >= 0x41 && $0 <= 0x5A }, "machine not lower-cased: \(machine)") }
    }
    let written = netrcText(netrc.entries)
    let reread = try? NetrcFile(parsing: written)
    check(reread == netrc, "round trip through quoted tokens: \(written)")
    if let first = netrc.entries.first(where: { $0.machine != nil }), let machine = first.machine {
        let upper = String(decoding: machine.utf8.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }, as: UTF8.self)
        check(netrc.entry(forHost: upper) != nil, "lookup of \(machine) is case-insensitive")
    }
    return 0
}
