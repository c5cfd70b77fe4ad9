//! Address resolution with Go's `net.Listen("tcp", addr)` conventions.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// The addresses to try, in order, for a listen address such as `localhost:0`, `:8474`,
/// `0.0.0.0:8474`, `[::1]:0` or `` (empty: any address, ephemeral port).
///
/// An empty host listens on every interface (IPv6 wildcard first, which is dual-stack on
/// Linux, then IPv4). A host name resolves with IPv4 first, as Go listens on one address of a
/// name and prefers IPv4.
pub async fn resolve_listen(listen: &str) -> io::Result<Vec<SocketAddr>> {
    let (host, port) = match listen.rsplit_once(':') {
        Some((host, port)) => (host, port),
        None if listen.is_empty() => ("", "0"),
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("address {listen}: missing port in address"),
            ))
        }
    };
    if host.is_empty() {
        let port: u16 = port.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("address {listen}: invalid port"),
            )
        })?;
        return Ok(vec![
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
        ]);
    }
    let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen).await?.collect();
    addrs.sort_by_key(|a| !a.is_ipv4());
    addrs.dedup();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("lookup {host}: no such host"),
        ));
    }
    Ok(addrs)
}

/// The address a listen address stands for, to compare with a bound one, like Go's
/// `net.ResolveTCPAddr("tcp", addr)` as upstream Toxiproxy's `Proxy.Differs` uses it:
/// `localhost:8666` is `127.0.0.1:8666`. It is the first address [`resolve_listen`] tries, so
/// an empty host is the IPv6 wildcard (Go keeps it empty, and upstream then finds `:8666`
/// different from the bound `[::]:8666`; here the two compare equal).
pub async fn resolve_for_compare(listen: &str) -> io::Result<SocketAddr> {
    resolve_listen(listen)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("address {listen}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_like_go() {
        let any = resolve_listen(":8474").await.unwrap();
        assert_eq!(any[0], "[::]:8474".parse().unwrap());
        assert_eq!(any[1], "0.0.0.0:8474".parse().unwrap());
        assert_eq!(resolve_listen("").await.unwrap()[1].port(), 0);
        let local = resolve_listen("localhost:0").await.unwrap();
        assert!(local[0].ip().is_loopback());
        assert!(resolve_listen("127.0.0.1").await.is_err());
        assert_eq!(
            resolve_listen("127.0.0.1:9").await.unwrap(),
            vec!["127.0.0.1:9".parse::<SocketAddr>().unwrap()]
        );
        let v4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(resolve_for_compare("localhost:9").await.unwrap(), v4);
        assert_eq!(resolve_for_compare("127.0.0.1:9").await.unwrap(), v4);
        assert!(resolve_for_compare("localhost").await.is_err());
    }
}
