import './base.css';
import './pages.css';
