#if canImport(HTTPWire)
    import HTTPWire
#endif

extension Metalink {
    /// The document as Metalink 4 XML (RFC 5854), whatever version it was read from: a Metalink 3 document comes
    /// out converted (its preferences are already priorities in the model). Parsing the result gives this value
    /// back with ``version`` `.v4` (the round trip the `metalink` fuzz target checks).
    public var metalink4Document: String {
        var out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metalink xmlns=\"\(Metalink.namespaceV4)\">\n"
        for file in files {
            out += "  <file name=\"\(Self.escaped(file.name, attribute: true))\">\n"
            if let size = file.size { out += "    <size>\(size)</size>\n" }
            for hash in file.hashes { out += "    <hash type=\"\(hash.algorithm.rawValue)\">\(hash.hex)</hash>\n" }
            for pieces in file.pieces {
                out += "    <pieces length=\"\(pieces.length)\" type=\"\(pieces.algorithm.rawValue)\">\n"
                for hash in pieces.hashes { out += "      <hash>\(hash.hex)</hash>\n" }
                out += "    </pieces>\n"
            }
            for url in file.urls {
                let location = url.location.map { " location=\"\(Self.escaped($0, attribute: true))\"" } ?? ""
                out +=
                    "    <url\(location) priority=\"\(url.priority)\">\(Self.escaped(url.url, attribute: false))</url>\n"
            }
            for meta in file.metaURLs {
                let name = meta.name.map { " name=\"\(Self.escaped($0, attribute: true))\"" } ?? ""
                out +=
                    "    <metaurl mediatype=\"\(Self.escaped(meta.mediaType, attribute: true))\" priority=\"\(meta.priority)\"\(name)>"
                out += "\(Self.escaped(meta.url, attribute: false))</metaurl>\n"
            }
            out += "  </file>\n"
        }
        return out + "</metalink>\n"
    }

    /// Text escaped for XML: `&`, `<`, `>` always; in attributes also `"` and the white space attribute-value
    /// normalisation would turn into spaces; CR everywhere (line-end normalisation would turn it into LF).
    private static func escaped(_ text: String, attribute: Bool) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"" where attribute: out += "&quot;"
            case "\t" where attribute: out += "&#9;"
            case "\n" where attribute: out += "&#10;"
            case "\r": out += "&#13;"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
