// Asio's and Beast's non-template code (the scheduler, the reactor, socket operations,
// the HTTP parser, error categories), compiled once for every target that links
// kvroute_asio. With BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION
// defined (CMakeLists.txt, KVROUTE_ASIO_SEPARATE_COMPILATION), the headers only declare
// that code, so the many translation units that include Asio and Beast do not each
// compile it again.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
