import Testing

@testable import HTTPWire

@Suite struct LinkHeaderTests {
    /// RFC 6249 §3's example and what mirror networks send: several links in one field, odd white space,
    /// quoted values with commas and semicolons, valueless `pref`, relation lists.
    @Test func parsesSeveralLinksWithOddSpacingAndQuotedCommas() throws {
        let value = """
            <http://www2.example.com/example.ext>; rel=duplicate; pri=2 ;geo=GB,\
            <ftp://ftp.example.com/example.ext>  ;rel="duplicate";pri=3;geo="us", \
            <http://example.com/example.ext.torrent>; rel=describedby; type="application/x-bittorrent", \
            <http://example.com/example.ext.meta4>; rel=describedby; type="application/metalink4+xml",\t\
            <https://mirror.example.net/example.ext>; rel = "duplicate"; pref; title="a, b; c=\\"d\\""
            """
        let header = try LinkHeader(parsing: value)
        #expect(header.links.count == 5)
        #expect(header.links[4].parameter("title") == "a, b; c=\"d\"")
        #expect(header.links[0].parameter("geo") == "GB")
        #expect(header.metalinkDescriptions == ["http://example.com/example.ext.meta4"])
        #expect(
            header.duplicates == [
                DuplicateLink(
                    url: "https://mirror.example.net/example.ext", priority: nil, location: nil, isPreferred: true,
                    depth: nil),
                DuplicateLink(
                    url: "http://www2.example.com/example.ext", priority: 2, location: "gb", isPreferred: false,
                    depth: nil),
                DuplicateLink(
                    url: "ftp://ftp.example.com/example.ext", priority: 3, location: "us", isPreferred: false,
                    depth: nil),
            ])
        #expect(try LinkHeader(parsing: header.headerValue) == header)
    }

    @Test(
        arguments: [
            // (value, mirrors' URLs best first)
            ("<a>; rel=duplicate; pri=999999, <b>; rel=duplicate; pri=1", ["b", "a"]),
            ("<a>; rel=duplicate; pri=0, <b>; rel=duplicate; pri=1000000, <c>; rel=duplicate; pri=5", ["c", "a", "b"]),
            ("<a>; rel=duplicate; pri=x, <b>; rel=duplicate; pri=\"7\"", ["b", "a"]),
            ("<a>; REL=\"describedby DUPLICATE\", <b>; rel=duplicated, <c>; rel=next", ["a"]),
            ("<a>; rel=duplicate; rel=next, <b>; rel=next; rel=duplicate", ["a"]),
            (", ,<a>;rel=duplicate,,", ["a"]),
            ("", []),
        ] as [(String, [String])])
    func ranksDuplicates(_ value: String, _ urls: [String]) throws {
        #expect(try LinkHeader(parsing: value).duplicates.map(\.url) == urls)
    }

    @Test(
        arguments: [("geo=de", "de"), ("geo=\"DE\"", "de"), ("geo=deu", nil), ("geo=d1", nil), ("pri=1", nil)]
            as [(String, String?)])
    func readsGeo(_ parameter: String, _ location: String?) throws {
        let link = try #require(LinkHeader(parsing: "<u>; rel=duplicate; \(parameter)").duplicates.first)
        #expect(link.location == location)
    }

    @Test(arguments: [
        "http://a/", "<http://a/", "<http://a/> x", "<http://a/>; =x", "<http://a/>; rel=", "<http://a/>; rel=\"dup",
        "<http://a/>; rel=a b", "<http://a b/>; rel=duplicate", "<a> <b>", "<http://a/>; title=\"\u{1}\"",
    ])
    func rejectsMalformedLinks(_ value: String) {
        #expect {
            try LinkHeader(parsing: value)
        } throws: { error in
            (error as? WireError)?.code == .malformedLink
        }
    }

    @Test func quotingIsByteWiseSoACombiningMarkCannotHideAQuote() throws {
        let link = LinkHeader.Link(
            target: "u", parameters: [.init(name: "title", value: "a\"\u{301}b\\"), .init(name: "pref", value: nil)])
        let header = LinkHeader(links: [link])
        #expect(try LinkHeader(parsing: header.headerValue) == header)
    }
}
